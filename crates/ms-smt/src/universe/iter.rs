//! Ordered leaf iteration: the leaves of a view in tree order, a page at
//! a time, resumable from a key cursor.
//!
//! Each page is a fresh walk from the view's root that skips every
//! subtree before the cursor, so memory stays bounded (one page of leaves
//! and the nodes read for it) and a cursor stays meaningful when writers
//! insert between pages, unlike an offset: the next page starts after the
//! last key returned, in whatever tree is current then. Within a page
//! every node is looked up by the hash its parent holds, so a page never
//! mixes two trees; if the current tree moves under a page, the page is
//! read again.
//!
//! ```text
//!   page:  root ─► skip subtrees before the cursor ─► in-order walk
//!            │          (store.read_in_order: the cursor's path and the
//!            │           nodes after it in key order, one round trip)
//!            └────► up to `page` leaves, then the cursor moves on
//! ```
#![deny(clippy::arithmetic_side_effects)]

use std::cmp::Ordering;
use std::ops::{Bound, RangeBounds};

use crate::descent::NodeCache;
use crate::empty::is_empty_hash;
use crate::error::{PlanError, TreeError};
use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::position::Position;
use crate::store::TreeStore;
use crate::tree::handle::Res;
use crate::tree::{Tree, View};

/// Leaves per page by default.
pub const DEFAULT_PAGE: usize = 1024;

/// One leaf of an iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafEntry {
    /// The leaf's key.
    pub key: Key,
    /// The leaf.
    pub leaf: Leaf,
    /// The leaf's hash (at level 256) and sum.
    pub node: ComputedNode,
}

impl LeafEntry {
    fn new(key: Key, leaf: Leaf) -> Self {
        let node = ComputedNode::new(leaf.hash(), leaf.sum());
        LeafEntry { key, leaf, node }
    }
}

/// Every page `next_page` hands out, until an empty one (the end).
pub(crate) async fn collect_pages<T, E>(
    mut next_page: impl AsyncFnMut() -> Result<Vec<T>, E>,
) -> Result<Vec<T>, E> {
    let mut out = Vec::new();
    loop {
        let page = next_page().await?;
        if page.is_empty() {
            return Ok(out);
        }
        out.extend(page);
    }
}

/// True when `key` lies at or after `start`.
pub(crate) fn after_start(key: &Key, start: &Bound<Key>) -> bool {
    match start {
        Bound::Unbounded => true,
        Bound::Included(s) => key.tree_cmp(s) != Ordering::Less,
        Bound::Excluded(s) => key.tree_cmp(s) == Ordering::Greater,
    }
}

/// True when `key` lies before `end`.
pub(crate) fn before_end(key: &Key, end: &Bound<Key>) -> bool {
    match end {
        Bound::Unbounded => true,
        Bound::Included(e) => key.tree_cmp(e) != Ordering::Greater,
        Bound::Excluded(e) => key.tree_cmp(e) == Ordering::Less,
    }
}

pub(crate) fn owned(bound: Bound<&Key>) -> Bound<Key> {
    match bound {
        Bound::Included(k) => Bound::Included(*k),
        Bound::Excluded(k) => Bound::Excluded(*k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The leaves of a [`View`] in tree order within a key range (see the
/// module docs). Made by [`View::leaves`] or [`Tree::leaves`](crate::Tree::leaves).
#[derive(Debug)]
pub struct Leaves<'t, S, L> {
    view: View<'t, S, L>,
    start: Bound<Key>,
    end: Bound<Key>,
    page: usize,
    done: bool,
    buffer: std::vec::IntoIter<LeafEntry>,
    /// The key of the last entry handed to the caller (not the last one
    /// fetched: a page is handed out one entry at a time by `next`).
    handed: Option<Key>,
}

impl<'t, S: TreeStore, L: Layout> View<'t, S, L> {
    /// The leaves with keys in `range`, in tree order (the order of
    /// [`Key::tree_cmp`]: the keys under any node are one run). `..` is
    /// every leaf; `(Bound::Excluded(cursor), Bound::Unbounded)` resumes
    /// after a cursor.
    pub fn leaves(&self, range: impl RangeBounds<Key>) -> Leaves<'t, S, L> {
        Leaves {
            view: *self,
            start: owned(range.start_bound()),
            end: owned(range.end_bound()),
            page: DEFAULT_PAGE,
            done: false,
            buffer: Vec::new().into_iter(),
            handed: None,
        }
    }
}

impl<S: TreeStore, L: Layout> Tree<S, L> {
    /// The current tree's leaves with keys in `range`, in tree order
    /// (see [`View::leaves`]).
    pub fn leaves(&self, range: impl std::ops::RangeBounds<Key>) -> Leaves<'_, S, L> {
        self.view().leaves(range)
    }
}

impl<'t, S: TreeStore, L: Layout> Leaves<'t, S, L> {
    /// Leaves per page (at least 1; default [`DEFAULT_PAGE`]).
    pub fn with_page(mut self, page: usize) -> Self {
        self.page = page.max(1);
        self
    }

    /// The key of the last entry handed out (by [`next`](Self::next) or
    /// [`next_page`](Self::next_page)): pass `(Bound::Excluded(cursor),
    /// end)` to a later [`View::leaves`] to resume with exactly the entries
    /// not yet handed out. `None` before the first.
    pub fn cursor(&self) -> Option<Key> {
        self.handed
    }

    /// The next leaf, `None` after the last.
    pub async fn next(&mut self) -> Res<Option<LeafEntry>, S> {
        loop {
            if let Some(entry) = self.buffer.next() {
                self.handed = Some(entry.key);
                return Ok(Some(entry));
            }
            if self.done {
                return Ok(None);
            }
            self.buffer = self.next_page().await?.into_iter();
        }
    }

    /// The next page of up to `page` leaves; empty after the last. Leaves
    /// already taken with [`next`](Self::next) are not returned again.
    pub async fn next_page(&mut self) -> Res<Vec<LeafEntry>, S> {
        let buffered: Vec<LeafEntry> = std::mem::take(&mut self.buffer).collect();
        if let Some(last) = buffered.last() {
            self.handed = Some(last.key);
            return Ok(buffered);
        }
        if self.done {
            return Ok(Vec::new());
        }
        let (view, this) = (self.view, &*self);
        let (page, finished) = view
            .tree
            .retrying(move || async move {
                let root = view.root().await?;
                match this.walk_page(&root).await {
                    Err(TreeError::Plan(e))
                        if view.tree.lost_race(view.target, &e, &root).await? =>
                    {
                        Ok(None)
                    }
                    other => other.map(Some),
                }
            })
            .await?;
        if let Some(last) = page.last() {
            self.start = Bound::Excluded(last.key);
            self.handed = Some(last.key);
        }
        self.done = finished;
        Ok(page)
    }

    /// Collects everything that is left (for small ranges and tests).
    pub async fn collect_all(mut self) -> Res<Vec<LeafEntry>, S> {
        collect_pages(async || self.next_page().await).await
    }

    /// One page: an in-order walk from `root`, skipping subtrees outside
    /// the range. Returns the leaves and whether the range is exhausted.
    async fn walk_page(&self, root: &ComputedNode) -> Res<(Vec<LeafEntry>, bool), S> {
        let mut out = Vec::new();
        let mut cache = NodeCache::new();
        let mut stack: Vec<(Position, Hash)> = Vec::new();
        if !is_empty_hash(0, &root.hash) {
            stack.push((Position::ROOT, root.hash));
        }
        while let Some(&(pos, hash)) = stack.last() {
            if out.len() >= self.page {
                return Ok((out, false));
            }
            let level = pos.level();
            if is_empty_hash(level, &hash) || !after_start(&pos.last_key(), &self.start) {
                stack.pop();
                continue;
            }
            if !before_end(pos.path(), &self.end) {
                return Ok((out, true));
            }
            if !cache.contains(&hash) {
                self.fill(&mut cache, pos, hash).await?;
            }
            let node = cache
                .take(&hash)
                .ok_or(PlanError::MissingNode { hash, level })?;
            stack.pop();
            match node {
                Node::Branch { left, right, .. } if level < MAX_LEVEL => {
                    stack.push((pos.child(true), right));
                    stack.push((pos.child(false), left));
                }
                Node::Compacted { key, leaf } => {
                    let key = key.under_path(pos.path(), level);
                    if after_start(&key, &self.start) && before_end(&key, &self.end) {
                        out.push(LeafEntry::new(key, leaf));
                    }
                }
                Node::Leaf(leaf) if level == MAX_LEVEL => {
                    let key = *pos.path();
                    if after_start(&key, &self.start) && before_end(&key, &self.end) {
                        out.push(LeafEntry::new(key, leaf));
                    }
                }
                other => {
                    return Err(PlanError::UnexpectedNode {
                        hash,
                        level,
                        found: other.kind_name(),
                    }
                    .into());
                }
            }
        }
        Ok((out, true))
    }

    /// Reads the nodes the walk needs from `pos` (whose node `hash` is
    /// missing) onwards.
    async fn fill(&self, cache: &mut NodeCache, pos: Position, hash: Hash) -> Res<(), S> {
        let store = self.view.tree.store();
        let lowest = *pos.path();
        let probe = match self.start {
            Bound::Included(k) | Bound::Excluded(k) if k.tree_cmp(&lowest) == Ordering::Greater => {
                k
            }
            _ => lowest,
        };
        let until = match self.end {
            Bound::Excluded(k) => Some(k),
            _ => None,
        };
        // Compacted trees of random keys hold about two leaves per row
        // (the bottom rows are sparse): a page's worth of rows covers a
        // page of leaves with some to spare.
        let rows = self.page.max(64);
        let nodes = store
            .read_in_order(self.view.target.at, (pos, hash), probe, until, rows)
            .await
            .map_err(TreeError::Store)?;
        cache.extend(nodes);
        Ok(())
    }
}
