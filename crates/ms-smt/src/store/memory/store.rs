//! In-memory store: reference-counted nodes keyed by hash, many namespaces.
//!
//! A node's reference count is the number of tree positions holding it, in
//! the current tree and in every pinned one: a pin walks its tree once and
//! takes one reference per position, so the nodes it uses outlive the
//! writes that replace them, and unpinning gives them back.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use super::locked::LockedMemory;
use super::nodes::{Dropped, Entry, Nodes};

use crate::audit::nodes::{NodeScan, audit_nodes_with};
use crate::audit::report::AuditReport;
use crate::descent::UpdateBatch;
use crate::empty::is_empty_hash;
use crate::hash::Hash;
use crate::key::Key;
use crate::key::MAX_LEVEL;
use crate::layout::LayoutKind;
use crate::node::{ComputedNode, Node};
use crate::pin::Pin;
use crate::position::Position;
use crate::progress::ProgressSink;
use crate::store::{
    AuditStore, BulkStore, Counters, ForestCommit, ForestStore, LockedWork, PathStart, PinStore,
    ReadAt, StoreError, StoreStats, TreeStore, TreeUpdate,
};

/// Nodes one "row" of an in-order read stands for (a 16-ary strata row
/// holds up to 30), so `limit` means the same on every store.
const NODES_PER_ROW: usize = 16;

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
    /// A commit of several trees named namespace `name` twice.
    #[error("a commit of several trees names namespace {name:?} twice")]
    SameTreeTwice {
        /// The namespace.
        name: String,
    },
    /// A thread panicked while holding the store's lock.
    #[error("a thread panicked while holding the store lock")]
    Poisoned,
    /// A read asked for a version of the namespace that no pin holds.
    #[error("no pin holds version {version} of this namespace")]
    NoSuchVersion {
        /// The version asked for.
        version: u64,
    },
    /// A node of a tree being walked (pinned, copied) is not stored: the
    /// store is corrupt.
    #[error("node {hash} is referenced but not stored")]
    Missing {
        /// The node hash.
        hash: Hash,
    },
}

#[derive(Debug)]
struct Space {
    root: ComputedNode,
    nodes: Nodes,
    /// Commits taken so far (a pin records the version it holds).
    version: u64,
    pins: BTreeMap<String, Pin>,
}

impl Default for Space {
    fn default() -> Self {
        Space {
            root: ComputedNode::empty_root(),
            nodes: Nodes::default(),
            version: 0,
            pins: BTreeMap::new(),
        }
    }
}

impl Space {
    /// The nodes an in-order walk of the subtree `from` needs next (see
    /// [`TreeStore::read_in_order`]): depth first in tree order from
    /// `from`, skipping subtrees wholly before `probe`, stopping at `until`
    /// or after about `limit` rows' worth of nodes.
    fn in_order(
        &self,
        from: (Position, Hash),
        probe: &Key,
        until: Option<&Key>,
        limit: usize,
    ) -> Vec<(Hash, Node)> {
        let budget = limit.saturating_mul(NODES_PER_ROW).max(NODES_PER_ROW);
        let mut out = Vec::new();
        let mut stack = vec![from];
        while let Some((pos, hash)) = stack.pop() {
            if out.len() >= budget || until.is_some_and(|u| pos.path().tree_cmp(u).is_ge()) {
                break;
            }
            if is_empty_hash(pos.level(), &hash) || pos.last_key().tree_cmp(probe).is_lt() {
                continue;
            }
            let Some(node) = self.nodes.get(&hash) else {
                continue;
            };
            let node = node.into_owned();
            if let Node::Branch { left, right, .. } = &node
                && pos.level() < MAX_LEVEL
            {
                stack.push((pos.child(true), *right));
                stack.push((pos.child(false), *left));
            }
            out.push((hash, node));
        }
        out
    }

    /// The nodes on the paths from `starts` (see
    /// [`TreeStore::read_paths`]), with the siblings beside them when
    /// `siblings`.
    fn paths(&self, starts: &[PathStart], siblings: bool) -> Vec<(Hash, Node)> {
        let mut out = Vec::new();
        // Sorted keys from one start share their top nodes: a walk resumes
        // where it leaves the previous key's path, so each shared node is
        // looked up and handed out once.
        // `path` holds the hashes of the current walk from its start's
        // level down, `prev` the previous walk's (buffers reused).
        let track = starts.len() > 1;
        let (mut path, mut prev): (Vec<Hash>, Vec<Hash>) = (Vec::new(), Vec::new());
        let mut prev_start: Option<&PathStart> = None;
        for start in starts {
            let (mut hash, mut level) = (start.hash, start.level);
            let mut emit_from = level;
            path.clear();
            if let Some(p) = prev_start
                && p.hash == start.hash
                && p.level == start.level
                && !prev.is_empty()
            {
                // The node at level L depends on the key bits above L only.
                let common = p.key.first_difference(&start.key).unwrap_or(MAX_LEVEL);
                let shared = common.min(start.level + prev.len() - 1);
                path.extend_from_slice(&prev[..=shared - start.level]);
                (hash, level) = (prev[shared - start.level], shared);
                emit_from = shared + 1;
            }
            while let Some(node) = self.nodes.get(&hash) {
                let node = node.into_owned();
                let children = match &node {
                    Node::Branch { left, right, .. } if level < MAX_LEVEL => Some((*left, *right)),
                    _ => None,
                };
                if level >= emit_from {
                    out.push((hash, node));
                    if track {
                        path.push(hash);
                    }
                }
                let Some((left, right)) = children else {
                    break;
                };
                let (next, other) = if start.key.bit(level) {
                    (right, left)
                } else {
                    (left, right)
                };
                if let Some(n) = self.nodes.get(&other).filter(|_| siblings) {
                    out.push((other, n.into_owned()));
                }
                (hash, level) = (next, level + 1);
            }
            std::mem::swap(&mut path, &mut prev);
            prev_start = Some(start);
        }
        out
    }

    /// The root of the tree `at` names.
    fn root_at(&self, at: ReadAt) -> Result<ComputedNode, MemoryError> {
        match at {
            ReadAt::Current => Ok(self.root),
            ReadAt::Version(v) if v == self.version => Ok(self.root),
            ReadAt::Version(version) => self
                .pins
                .values()
                .find(|p| p.version == version)
                .map(|p| p.root)
                .ok_or(MemoryError::NoSuchVersion { version }),
        }
    }

    /// Calls `visit` once per position of the tree under `root` with the
    /// node there and its level (depth first).
    fn each_position(
        &self,
        root: &ComputedNode,
        mut visit: impl FnMut(&Hash, usize, &Node),
    ) -> Result<(), MemoryError> {
        let mut stack = Vec::new();
        if !is_empty_hash(0, &root.hash) {
            stack.push((root.hash, 0usize));
        }
        while let Some((hash, level)) = stack.pop() {
            let node = self.nodes.get(&hash).ok_or(MemoryError::Missing { hash })?;
            visit(&hash, level, &node);
            if let Node::Branch { left, right, .. } = &*node
                && level < MAX_LEVEL
            {
                for child in [left, right] {
                    if !is_empty_hash(level + 1, child) {
                        stack.push((*child, level + 1));
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes one reference per position of the tree under `root`.
    fn hold(&mut self, root: &ComputedNode) -> Result<(), MemoryError> {
        let mut held: Vec<Hash> = Vec::new();
        self.each_position(root, |hash, _, _| held.push(*hash))?;
        for hash in held {
            self.nodes.take_ref(&hash);
        }
        Ok(())
    }

    /// Gives back the references [`hold`](Self::hold) took, removing the
    /// nodes no position holds any more.
    fn release(&mut self, root: &ComputedNode) -> Result<(), MemoryError> {
        let mut held: Vec<Hash> = Vec::new();
        self.each_position(root, |hash, _, _| held.push(*hash))?;
        for hash in held {
            self.nodes.drop_ref(&hash);
        }
        Ok(())
    }

    /// True when nothing is stored and nothing is pinned.
    fn is_vacant(&self) -> bool {
        self.root == ComputedNode::empty_root() && self.nodes.is_empty() && self.pins.is_empty()
    }
}

type Namespaces = HashMap<String, Arc<RwLock<Space>>>;

/// A store in process memory.
///
/// Cloning gives another handle on the same namespace. [`MemoryStore::open_namespace`]
/// opens another independent tree in the same "database". Nodes carry a
/// reference count (one per tree position using them), so deleting or
/// replacing a key never removes a node another position still uses.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    db: Arc<Mutex<Namespaces>>,
    /// The database's write lock: every commit holds it shared, a writer
    /// that locks ([`ForestStore::locked`]) holds it alone; taken without
    /// a queue ([`MemoryStore::shared`], [`MemoryStore::alone`]).
    gate: Arc<tokio::sync::RwLock<()>>,
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
    /// The root record, every stored node with its reference count, and
    /// the pinned roots, from one snapshot: what [`audit_nodes`](crate::audit::audit_nodes) checks.
    pub fn scan_nodes(&self) -> Result<NodeScan, MemoryError> {
        let space = self.read()?;
        let nodes = space
            .nodes
            .iter()
            .map(|(hash, node, refs)| (hash, node.into_owned(), refs))
            .collect();
        Ok(NodeScan {
            root: space.root,
            nodes,
            pinned: space.pins.values().map(|p| p.root).collect(),
        })
    }

    /// A new, empty database, opened at the namespace `"default"`.
    pub fn new() -> Self {
        let db: Arc<Mutex<Namespaces>> = Arc::default();
        let space: Arc<RwLock<Space>> = Arc::default();
        if let Ok(mut map) = db.lock() {
            map.insert("default".to_owned(), space.clone());
        }
        MemoryStore {
            db,
            gate: Arc::default(),
            space,
            name: Arc::from("default"),
            counters: Arc::default(),
        }
    }

    /// A handle on namespace `name` of the same database (created empty if new).
    pub fn open_namespace(&self, name: &str) -> Result<MemoryStore, MemoryError> {
        let mut map = self.db.lock().map_err(|_| MemoryError::Poisoned)?;
        let space = map.entry(name.to_owned()).or_default().clone();
        Ok(MemoryStore {
            db: self.db.clone(),
            gate: self.gate.clone(),
            space,
            name: Arc::from(name),
            counters: self.counters.clone(),
        })
    }

    /// This handle's namespace.
    pub fn name(&self) -> &str {
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
            .map(|(hash, node, refs)| (hash, node.into_owned(), refs))
            .collect();
        rows.sort_unstable_by_key(|r| r.0);
        Ok(rows)
    }

    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Space>, MemoryError> {
        self.space.read().map_err(|_| MemoryError::Poisoned)
    }

    /// Applies `batch`'s node changes to `space`, handing back the number
    /// of changes and the nodes it removed, so that [`undo`](Self::undo)
    /// can take the whole batch back (a commit of several trees whose later
    /// part fails).
    fn apply_undoable(
        space: &mut Space,
        batch: &UpdateBatch,
    ) -> Result<(u64, Vec<Entry>), MemoryError> {
        // Inserts first, so a row that moves between positions never drops to
        // zero in between; a failing delete is undone in reverse. Reserving
        // the net growth up front avoids growing a large store repeatedly.
        space
            .nodes
            .reserve(batch.inserts.len().saturating_sub(batch.deletes.len()));
        space.nodes.add_refs(&batch.inserts);
        let mut removed: Vec<Entry> = Vec::new();
        for (done, (_, hash)) in batch.deletes.iter().enumerate() {
            match space.nodes.drop_ref(hash) {
                Dropped::Kept => {}
                Dropped::Removed(mut e) => {
                    e.refs = 0;
                    removed.push(e);
                }
                Dropped::Missing => {
                    Self::undo(space, batch, done, removed);
                    return Err(MemoryError::MissingReference { hash: *hash });
                }
            }
        }
        Ok(((batch.inserts.len() + batch.deletes.len()) as u64, removed))
    }

    fn undo(space: &mut Space, batch: &UpdateBatch, deletes_done: usize, removed: Vec<Entry>) {
        for entry in removed {
            space.nodes.restore(entry);
        }
        for (_, hash) in &batch.deletes[..deletes_done] {
            space.nodes.take_ref(hash);
        }
        // `removed` entries were re-inserted with refs 0 before their delete;
        // the loop above restored them to 1 along with the others.
        for (_, hash, _) in &batch.inserts {
            space.nodes.drop_ref(hash);
        }
    }
}

impl TreeStore for MemoryStore {
    type Error = MemoryError;

    async fn load_root(&self) -> Result<ComputedNode, MemoryError> {
        self.counters.round_trip(1);
        Ok(self.read()?.root)
    }

    async fn read_paths(
        &self,
        _at: ReadAt,
        starts: &[PathStart],
        siblings: bool,
    ) -> Result<Vec<(Hash, Node)>, MemoryError> {
        self.counters.round_trip(1);
        let space = self.read()?;
        let out = space.paths(starts, siblings);
        self.counters.read(out.len() as u64);
        Ok(out)
    }

    async fn read_positions(
        &self,
        _at: ReadAt,
        nodes: &[(Position, Hash)],
    ) -> Result<Vec<(Hash, Node)>, MemoryError> {
        self.counters.round_trip(1);
        let space = self.read()?;
        let out: Vec<(Hash, Node)> = nodes
            .iter()
            .filter_map(|(_, h)| space.nodes.get(h).map(|n| (*h, n.into_owned())))
            .collect();
        self.counters.read(out.len() as u64);
        Ok(out)
    }

    async fn read_in_order(
        &self,
        _at: ReadAt,
        from: (Position, Hash),
        probe: Key,
        until: Option<Key>,
        limit: usize,
    ) -> Result<Vec<(Hash, Node)>, MemoryError> {
        self.counters.round_trip(1);
        let space = self.read()?;
        let out = space.in_order(from, &probe, until.as_ref(), limit);
        self.counters.read(out.len() as u64);
        Ok(out)
    }

    async fn delete_all(&self) -> Result<(), MemoryError> {
        self.counters.round_trip(1);
        let _gate = self.shared().await;
        let mut space = self.space.write().map_err(|_| MemoryError::Poisoned)?;
        let version = space.version + 1;
        if space.pins.is_empty() {
            *space = Space::default();
        } else {
            // Only the current tree's references go; pinned trees stay.
            let root = space.root;
            space.release(&root)?;
            space.root = ComputedNode::empty_root();
        }
        space.version = version;
        Ok(())
    }

    fn stats(&self) -> StoreStats {
        self.counters.snapshot()
    }

    fn namespace(&self) -> Option<&str> {
        Some(&self.name)
    }
}

impl StoreError for MemoryError {}

impl AuditStore for MemoryStore {
    async fn audit(
        &self,
        kind: LayoutKind,
        progress: &ProgressSink,
    ) -> Result<AuditReport, MemoryError> {
        Ok(audit_nodes_with(kind, &self.scan_nodes()?, progress))
    }
}

impl PinStore for MemoryStore {
    async fn pin(&self, name: &str) -> Result<Pin, MemoryError> {
        self.counters.round_trip(1);
        let mut space = self.space.write().map_err(|_| MemoryError::Poisoned)?;
        let root = space.root;
        space.hold(&root)?;
        let pin = Pin {
            name: name.to_owned(),
            root,
            version: space.version,
        };
        if let Some(old) = space.pins.insert(name.to_owned(), pin.clone()) {
            space.release(&old.root)?;
        }
        Ok(pin)
    }

    async fn unpin(&self, name: &str) -> Result<bool, MemoryError> {
        self.counters.round_trip(1);
        let mut space = self.space.write().map_err(|_| MemoryError::Poisoned)?;
        match space.pins.remove(name) {
            Some(pin) => space.release(&pin.root).map(|()| true),
            None => Ok(false),
        }
    }

    async fn pinned(&self, name: &str) -> Result<Option<Pin>, MemoryError> {
        self.counters.round_trip(1);
        Ok(self.read()?.pins.get(name).cloned())
    }

    async fn pins(&self) -> Result<Vec<Pin>, MemoryError> {
        self.counters.round_trip(1);
        let mut pins: Vec<Pin> = self.read()?.pins.values().cloned().collect();
        pins.sort_by(|a, b| a.version.cmp(&b.version).then_with(|| a.name.cmp(&b.name)));
        Ok(pins)
    }
}

impl BulkStore for MemoryStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn open_namespace(&self, name: &str) -> Result<Self, MemoryError> {
        MemoryStore::open_namespace(self, name)
    }

    /// Copies node by node in process memory (any two memory stores).
    async fn copy_into(
        &self,
        at: ReadAt,
        target: &Self,
    ) -> Result<Option<ComputedNode>, MemoryError> {
        self.counters.round_trip(1);
        if Arc::ptr_eq(&self.space, &target.space) {
            return Ok(None);
        }
        let _gate = self.shared().await;
        // The source is read first and released, so the two locks are
        // never held together.
        let (root, copied) = {
            let space = self.read()?;
            let root = space.root_at(at)?;
            let mut copied = Nodes::default();
            space.each_position(&root, |hash, level, node| copied.add_ref(level, hash, node))?;
            (root, copied)
        };
        let mut space = target.space.write().map_err(|_| MemoryError::Poisoned)?;
        if !space.is_vacant() {
            return Ok(None);
        }
        space.nodes = copied;
        space.root = root;
        space.version += 1;
        self.counters.written(space.nodes.len() as u64);
        Ok(Some(root))
    }

    async fn swap_in_from(
        &self,
        staging: &Self,
        expected: &ComputedNode,
    ) -> Result<bool, MemoryError> {
        self.counters.round_trip(1);
        if Arc::ptr_eq(&self.space, &staging.space) || !Arc::ptr_eq(&self.db, &staging.db) {
            return Ok(false);
        }
        let _gate = self.shared().await;
        let mut db = self.db.lock().map_err(|_| MemoryError::Poisoned)?;
        // Both spaces are locked under the database lock, so no other swap
        // can take them in the other order.
        let mut mine = self.space.write().map_err(|_| MemoryError::Poisoned)?;
        let mut theirs = staging.space.write().map_err(|_| MemoryError::Poisoned)?;
        if !mine.is_vacant() || theirs.root != *expected || !theirs.pins.is_empty() {
            return Ok(false);
        }
        let version = mine.version;
        *mine = std::mem::take(&mut *theirs);
        mine.version = version + 1;
        if db
            .get(&*staging.name)
            .is_some_and(|s| Arc::ptr_eq(s, &staging.space))
        {
            db.remove(&*staging.name);
        }
        Ok(true)
    }

    /// Nothing lists a memory store's namespaces, and a vacant one holds
    /// nothing, so it is kept: every handle on the name stays on one tree.
    async fn forget_if_vacant(&self) -> Result<bool, MemoryError> {
        self.counters.round_trip(1);
        let space = self.space.read().map_err(|_| MemoryError::Poisoned)?;
        Ok(space.is_vacant())
    }
}

/// The namespaces of one memory database, committed together under every
/// touched namespace's lock.
impl ForestStore for MemoryStore {
    type Error = MemoryError;
    type Tree = MemoryStore;

    fn tree(&self, name: &str) -> Result<MemoryStore, MemoryError> {
        self.open_namespace(name)
    }

    async fn names(&self) -> Result<Vec<String>, MemoryError> {
        let db = self.db.lock().map_err(|_| MemoryError::Poisoned)?;
        let mut names: Vec<String> = db.keys().cloned().collect();
        names.sort();
        Ok(names)
    }

    /// Under the database's write lock, shared: every touched namespace's
    /// lock taken in name order, every root checked, then the parts applied.
    async fn commit_trees(
        &self,
        updates: &[TreeUpdate<'_, MemoryStore>],
    ) -> Result<ForestCommit, MemoryError> {
        let _gate = self.shared().await;
        self.commit_parts(updates)
    }

    /// The database's write lock, held alone while `work` runs on a view
    /// whose commits need not take it.
    async fn locked<W>(
        &self,
        _trees: &[&MemoryStore],
        work: W,
    ) -> Result<Option<W::Output>, MemoryError>
    where
        W: LockedWork<MemoryStore>,
    {
        self.counters.round_trip(1);
        let _alone = self.alone().await;
        Ok(Some(work.run(&LockedMemory(self)).await))
    }
}

impl MemoryStore {
    /// The gate, shared: what every commit holds.
    ///
    /// Taken without a queue: a waiter tries again at its next poll
    /// instead of waiting in line. What holds the gate here never
    /// suspends (a commit, or a locked write whose reads and commit on
    /// this store are ready at once), so it is held for microseconds
    /// within one poll, and a fair queue (tokio's `RwLock::read`/`write`)
    /// would only add a wake-up per waiter: with 1,000 tasks writing one
    /// tree, every write then waited in line behind the locked ones for
    /// its wake-up (1,000 × 1 direct `insert_many`: 9,000 leaves/s
    /// against 24,000 with a lock that does not queue; BENCHMARKS.md).
    async fn shared(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        loop {
            if let Ok(guard) = self.gate.try_read() {
                return guard;
            }
            tokio::task::yield_now().await;
        }
    }

    /// The gate, alone: what a locked write holds (see [`shared`](Self::shared)).
    async fn alone(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        loop {
            if let Ok(guard) = self.gate.try_write() {
                return guard;
            }
            tokio::task::yield_now().await;
        }
    }

    /// Takes every touched namespace's lock (in name order, under the
    /// database lock, so no other commit of several trees or swap takes
    /// them in another order), checks every root, then applies the parts
    /// in turn; a part that fails takes the ones before it back. The
    /// caller holds the database's write lock.
    pub(super) fn commit_parts(
        &self,
        updates: &[TreeUpdate<'_, MemoryStore>],
    ) -> Result<ForestCommit, MemoryError> {
        self.counters.round_trip(1);
        let mut order: Vec<usize> = (0..updates.len()).collect();
        order.sort_by(|a, b| updates[*a].tree.name.cmp(&updates[*b].tree.name));
        for pair in order.windows(2) {
            let (a, b) = (updates[pair[0]].tree, updates[pair[1]].tree);
            if Arc::ptr_eq(&a.space, &b.space) {
                return Err(MemoryError::SameTreeTwice {
                    name: a.name.to_string(),
                });
            }
        }
        let mut guards = {
            let _db = self.db.lock().map_err(|_| MemoryError::Poisoned)?;
            let mut guards = Vec::with_capacity(order.len());
            for &i in &order {
                let guard = updates[i]
                    .tree
                    .space
                    .write()
                    .map_err(|_| MemoryError::Poisoned)?;
                guards.push((i, guard));
            }
            guards
        };
        for (i, space) in &guards {
            if space.root != updates[*i].batch.old_root {
                self.counters.conflict();
                return Ok(ForestCommit::RootMoved {
                    index: *i,
                    current: space.root,
                });
            }
        }
        let mut applied: Vec<(usize, Vec<Entry>)> = Vec::with_capacity(guards.len());
        let mut written = 0u64;
        for g in 0..guards.len() {
            let batch = updates[guards[g].0].batch;
            if batch.is_noop() {
                continue;
            }
            match Self::apply_undoable(&mut guards[g].1, batch) {
                Ok((n, removed)) => {
                    written += n;
                    applied.push((g, removed));
                }
                Err(e) => {
                    for (g, removed) in applied.into_iter().rev() {
                        let batch = updates[guards[g].0].batch;
                        Self::undo(&mut guards[g].1, batch, batch.deletes.len(), removed);
                    }
                    return Err(e);
                }
            }
        }
        for (g, _) in applied {
            let (i, space) = &mut guards[g];
            space.root = updates[*i].batch.new_root;
            space.version += 1;
        }
        self.counters.written(written);
        Ok(ForestCommit::Committed)
    }
}
