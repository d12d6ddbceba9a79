//! In-memory store: reference-counted nodes keyed by hash, many namespaces.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use super::{CommitOutcome, Counters, PathStart, StoreStats, TreeStore, UpdateBatch};
use crate::audit::NodeScan;
use crate::hash::Hash;
use crate::key::MAX_LEVEL;
use crate::node::{ComputedNode, Node};

/// Errors of the in-memory store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// A batch dropped a reference to a node the store does not hold. The
    /// batch was rolled back; the store is as it was before the commit.
    #[error("batch deletes node {hash}, which the store does not hold")]
    MissingReference {
        /// The node hash.
        hash: Hash,
    },
    /// A thread panicked while holding the store's lock.
    #[error("a thread panicked while holding the store lock")]
    Poisoned,
}

type NodeMap = HashMap<Hash, Entry, foldhash::fast::RandomState>;

#[derive(Debug, Clone)]
struct Entry {
    node: Node,
    refs: u64,
}

#[derive(Debug)]
struct Space {
    root: ComputedNode,
    nodes: NodeMap,
}

impl Default for Space {
    fn default() -> Self {
        Space {
            root: ComputedNode::empty_root(),
            nodes: NodeMap::default(),
        }
    }
}

type Namespaces = HashMap<String, Arc<RwLock<Space>>>;

/// A store in process memory.
///
/// Cloning gives another handle on the same namespace. [`MemoryStore::namespace`]
/// opens another independent tree in the same "database". Nodes carry a
/// reference count (one per tree position using them), so deleting or
/// replacing a key never removes a node another position still uses.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    db: Arc<Mutex<Namespaces>>,
    space: Arc<RwLock<Space>>,
    name: Arc<str>,
    counters: Arc<Counters>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A new, empty database, opened at the namespace `"default"`.
    pub fn new() -> Self {
        let db: Arc<Mutex<Namespaces>> = Arc::default();
        let space: Arc<RwLock<Space>> = Arc::default();
        if let Ok(mut map) = db.lock() {
            map.insert("default".to_owned(), space.clone());
        }
        MemoryStore {
            db,
            space,
            name: Arc::from("default"),
            counters: Arc::default(),
        }
    }

    /// A handle on namespace `name` of the same database (created empty if new).
    pub fn namespace(&self, name: &str) -> Result<MemoryStore, MemoryError> {
        let mut map = self.db.lock().map_err(|_| MemoryError::Poisoned)?;
        let space = map.entry(name.to_owned()).or_default().clone();
        Ok(MemoryStore {
            db: self.db.clone(),
            space,
            name: Arc::from(name),
            counters: self.counters.clone(),
        })
    }

    /// This handle's namespace.
    pub fn namespace_name(&self) -> &str {
        &self.name
    }

    /// Number of distinct node rows in this namespace.
    pub fn node_count(&self) -> Result<usize, MemoryError> {
        Ok(self.read()?.nodes.len())
    }

    /// Every row of this namespace as `(hash, node, reference count)`, in
    /// hash order; tests compare it before and after rejected writes.
    pub fn rows(&self) -> Result<Vec<(Hash, Node, u64)>, MemoryError> {
        let space = self.read()?;
        let mut rows: Vec<_> = space
            .nodes
            .iter()
            .map(|(h, e)| (*h, e.node.clone(), e.refs))
            .collect();
        rows.sort_unstable_by_key(|r| r.0);
        Ok(rows)
    }

    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Space>, MemoryError> {
        self.space.read().map_err(|_| MemoryError::Poisoned)
    }

    fn apply(space: &mut Space, batch: &UpdateBatch) -> Result<u64, MemoryError> {
        // Inserts first, so a row that moves between positions never drops to
        // zero in between; a failing delete is undone in reverse. Reserving
        // the net growth up front avoids rehashing a large map repeatedly.
        space
            .nodes
            .reserve(batch.inserts.len().saturating_sub(batch.deletes.len()));
        for (_, hash, node) in &batch.inserts {
            space
                .nodes
                .entry(*hash)
                .or_insert_with(|| Entry {
                    node: node.clone(),
                    refs: 0,
                })
                .refs += 1;
        }
        let mut removed: Vec<(Hash, Entry)> = Vec::new();
        for (done, (_, hash)) in batch.deletes.iter().enumerate() {
            let ok = match space.nodes.get(hash).map(|e| e.refs) {
                Some(refs) if refs > 1 => {
                    if let Some(e) = space.nodes.get_mut(hash) {
                        e.refs -= 1;
                    }
                    true
                }
                Some(_) => {
                    if let Some(mut e) = space.nodes.remove(hash) {
                        e.refs = 0;
                        removed.push((*hash, e));
                    }
                    true
                }
                None => false,
            };
            if !ok {
                Self::undo(space, batch, done, removed);
                return Err(MemoryError::MissingReference { hash: *hash });
            }
        }
        Ok((batch.inserts.len() + batch.deletes.len()) as u64)
    }

    fn undo(
        space: &mut Space,
        batch: &UpdateBatch,
        deletes_done: usize,
        removed: Vec<(Hash, Entry)>,
    ) {
        for (hash, entry) in removed {
            space.nodes.insert(hash, entry);
        }
        for (_, hash) in &batch.deletes[..deletes_done] {
            if let Some(e) = space.nodes.get_mut(hash) {
                e.refs += 1;
            }
        }
        // `removed` entries were re-inserted with refs 0 before their delete;
        // the loop above restored them to 1 along with the others.
        for (_, hash, _) in &batch.inserts {
            if let Some(e) = space.nodes.get_mut(hash) {
                e.refs -= 1;
                if e.refs == 0 {
                    space.nodes.remove(hash);
                }
            }
        }
    }
}

impl TreeStore for MemoryStore {
    type Error = MemoryError;

    async fn load_root(&self) -> Result<ComputedNode, MemoryError> {
        self.counters.round_trip(1);
        Ok(self.read()?.root)
    }

    async fn fetch_nodes(&self, hashes: &[Hash]) -> Result<Vec<(Hash, Node)>, MemoryError> {
        self.counters.round_trip(1);
        let space = self.read()?;
        let out: Vec<(Hash, Node)> = hashes
            .iter()
            .filter_map(|h| space.nodes.get(h).map(|e| (*h, e.node.clone())))
            .collect();
        self.counters.read(out.len() as u64);
        Ok(out)
    }

    fn supports_key_paths(&self) -> bool {
        true
    }

    async fn fetch_key_paths(
        &self,
        starts: &[PathStart],
        siblings: bool,
    ) -> Result<Option<Vec<(Hash, Node)>>, MemoryError> {
        self.counters.round_trip(1);
        let space = self.read()?;
        let mut out = Vec::new();
        for start in starts {
            let (mut hash, mut level) = (start.hash, start.level);
            while let Some(entry) = space.nodes.get(&hash) {
                out.push((hash, entry.node.clone()));
                let Node::Branch { left, right, .. } = &entry.node else {
                    break;
                };
                if level >= MAX_LEVEL {
                    break;
                }
                let (next, other) = if start.key.bit(level) {
                    (*right, *left)
                } else {
                    (*left, *right)
                };
                if let Some(e) = space.nodes.get(&other).filter(|_| siblings) {
                    out.push((other, e.node.clone()));
                }
                (hash, level) = (next, level + 1);
            }
        }
        self.counters.read(out.len() as u64);
        Ok(Some(out))
    }

    async fn commit(&self, batch: &UpdateBatch) -> Result<CommitOutcome, MemoryError> {
        self.counters.round_trip(1);
        let mut space = self.space.write().map_err(|_| MemoryError::Poisoned)?;
        if space.root != batch.old_root {
            self.counters.conflict();
            return Ok(CommitOutcome::RootMoved {
                current: space.root,
            });
        }
        let written = Self::apply(&mut space, batch)?;
        space.root = batch.new_root;
        self.counters.written(written);
        Ok(CommitOutcome::Committed)
    }

    async fn delete_all(&self) -> Result<(), MemoryError> {
        self.counters.round_trip(1);
        let mut space = self.space.write().map_err(|_| MemoryError::Poisoned)?;
        *space = Space::default();
        Ok(())
    }

    fn stats(&self) -> StoreStats {
        self.counters.snapshot()
    }

    async fn scan_nodes(&self) -> Result<Option<NodeScan>, MemoryError> {
        let space = self.read()?;
        let nodes = space
            .nodes
            .iter()
            .map(|(h, e)| (*h, e.node.clone(), e.refs))
            .collect();
        Ok(Some(NodeScan {
            root: space.root,
            nodes,
        }))
    }
}
