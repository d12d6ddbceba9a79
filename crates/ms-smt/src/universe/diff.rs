//! Diff between two trees: the keys whose leaves differ, in tree order,
//! visiting only subtrees whose hashes differ.
//!
//! Both sides are [`View`]s of one store type: two namespaces, or two
//! roots of one namespace (a pin and the current tree). The walk goes down
//! both trees together; a pair of subtrees with the same hash is skipped
//! whole. Where one side holds a single (compacted) leaf and the other a
//! branch, the leaf is carried down beside the branch until the two meet
//! leaf to leaf. Missing nodes are read with
//! [`TreeStore::read_positions`], for many pending subtrees at once.
//!
//! Results come a page at a time, resumable from a key cursor like
//! [`Leaves`](crate::tree::Leaves); each page walks again from both roots.
#![deny(clippy::arithmetic_side_effects)]

use std::ops::{Bound, RangeBounds};

use tracing::field::Empty;

use crate::descent::NodeCache;
use crate::descent::NodeSource;
use crate::empty::is_empty_hash;
use crate::error::{PlanError, TreeError};
use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::{ComputedNode, Node};
use crate::position::Position;
use crate::store::TreeStore;
use crate::tree::View;
use crate::tree::handle::Res;
use crate::tree::traced::Traced;
use crate::universe::iter::DEFAULT_PAGE;
use crate::universe::iter::{after_start, before_end, collect_pages, owned};

/// Pending subtrees whose nodes one store call fetches at most.
const FETCH_BATCH: usize = 256;

/// One key whose leaf differs between the two trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffEntry {
    /// The key.
    pub key: Key,
    /// Its leaf in the old tree (empty: absent there).
    pub old: Leaf,
    /// Its leaf in the new tree (empty: absent there).
    pub new: Leaf,
}

/// One side of a pair of subtrees at the same position.
#[derive(Debug, Clone)]
enum Side {
    /// No leaf below.
    Empty,
    /// A stored node, known by hash.
    Stored(Hash),
    /// A single leaf carried down from a compacted leaf above.
    Lone(Key, Leaf),
}

impl Side {
    fn of(level: usize, hash: Hash) -> Side {
        if is_empty_hash(level, &hash) {
            Side::Empty
        } else {
            Side::Stored(hash)
        }
    }

    /// The side's subtree at `pos.child(right)`, given its resolved node.
    fn child(resolved: &Resolved, pos: &Position, right: bool) -> Side {
        let level = pos.level().saturating_add(1);
        match resolved {
            Resolved::Empty => Side::Empty,
            Resolved::Branch { left, right: r } => Side::of(level, if right { *r } else { *left }),
            Resolved::Lone(key, leaf) if key.bit(pos.level()) == right => {
                Side::Lone(*key, leaf.clone())
            }
            Resolved::Lone(..) => Side::Empty,
        }
    }
}

/// A side with its node read.
#[derive(Debug)]
enum Resolved {
    Empty,
    Branch { left: Hash, right: Hash },
    Lone(Key, Leaf),
}

/// The keys whose leaves differ between two views, in tree order; see
/// the module docs. Made by [`View::diff`].
#[derive(Debug)]
pub struct Diff<'a, 'b, S, L1, L2> {
    old: View<'a, S, L1>,
    new: View<'b, S, L2>,
    start: Bound<Key>,
    end: Bound<Key>,
    page: usize,
    done: bool,
}

impl<'a, S: TreeStore, L1: Layout> View<'a, S, L1> {
    /// The keys whose leaves differ from this view (old) to `new`, in tree
    /// order, with both leaves. Pass a range with [`Diff::within`].
    pub fn diff<'b, L2: Layout>(&self, new: &View<'b, S, L2>) -> Diff<'a, 'b, S, L1, L2> {
        Diff {
            old: *self,
            new: *new,
            start: Bound::Unbounded,
            end: Bound::Unbounded,
            page: DEFAULT_PAGE,
            done: false,
        }
    }
}

impl<S: TreeStore, L1: Layout, L2: Layout> Diff<'_, '_, S, L1, L2> {
    /// Only keys within `range` (tree order).
    pub fn within(mut self, range: impl RangeBounds<Key>) -> Self {
        self.start = owned(range.start_bound());
        self.end = owned(range.end_bound());
        self
    }

    /// Entries per page (at least 1; default [`DEFAULT_PAGE`]).
    pub fn with_page(mut self, page: usize) -> Self {
        self.page = page.max(1);
        self
    }

    /// The next page of differences; empty after the last.
    pub async fn next_page(&mut self) -> Res<Vec<DiffEntry>, S> {
        if self.done {
            return Ok(Vec::new());
        }
        let (old, new, this) = (self.old, self.new, &*self);
        let span = tracing::debug_span!(
            target: "ms_smt",
            "diff",
            namespace = old.tree.store().namespace(),
            page = self.page,
            entries = Empty,
            attempts = Empty,
        );
        let traced = Traced::new(span, old.tree.store());
        let walk = old.tree.retrying(move || async move {
            let (old_root, new_root) = (old.root().await?, new.root().await?);
            match this.walk_page(&old_root, &new_root).await {
                Err(TreeError::Plan(e)) => {
                    let moved = old.tree.lost_race(old.target, &e, &old_root).await?
                        || new.tree.lost_race(new.target, &e, &new_root).await?;
                    if moved {
                        Ok(None)
                    } else {
                        Err(TreeError::Plan(e))
                    }
                }
                other => other.map(Some),
            }
        });
        let (page, finished) = traced.run(old.tree.store(), walk).await?;
        traced.span().record("entries", page.len());
        if let Some(last) = page.last() {
            self.start = Bound::Excluded(last.key);
        }
        self.done = finished;
        Ok(page)
    }

    /// Every difference that is left.
    pub async fn collect_all(mut self) -> Res<Vec<DiffEntry>, S> {
        collect_pages(async || self.next_page().await).await
    }

    fn emit(&self, out: &mut Vec<DiffEntry>, key: Key, old: Leaf, new: Leaf) {
        if old != new && after_start(&key, &self.start) && before_end(&key, &self.end) {
            out.push(DiffEntry { key, old, new });
        }
    }

    async fn walk_page(
        &self,
        old_root: &ComputedNode,
        new_root: &ComputedNode,
    ) -> Res<(Vec<DiffEntry>, bool), S> {
        let mut out = Vec::new();
        let (mut old_cache, mut new_cache) = (NodeCache::new(), NodeCache::new());
        let mut stack = vec![(
            Position::ROOT,
            Side::of(0, old_root.hash),
            Side::of(0, new_root.hash),
        )];
        while let Some((pos, a, b)) = stack.last() {
            if out.len() >= self.page {
                return Ok((out, false));
            }
            let same = match (a, b) {
                (Side::Empty, Side::Empty) => true,
                (Side::Stored(x), Side::Stored(y)) => x == y,
                (Side::Lone(k, l), Side::Lone(k2, l2)) => k == k2 && l == l2,
                _ => false,
            };
            if same || !after_start(&pos.last_key(), &self.start) {
                stack.pop();
                continue;
            }
            if !before_end(pos.path(), &self.end) {
                return Ok((out, true));
            }
            let missing_old = matches!(a, Side::Stored(h) if !old_cache.contains(h));
            let missing_new = matches!(b, Side::Stored(h) if !new_cache.contains(h));
            if missing_old || missing_new {
                self.fill(&stack, &mut old_cache, &mut new_cache).await?;
            }
            let Some((pos, a, b)) = stack.pop() else {
                break;
            };
            let a = resolve(&mut old_cache, &pos, a)?;
            let b = resolve(&mut new_cache, &pos, b)?;
            match (a, b) {
                (Resolved::Lone(ka, la), Resolved::Lone(kb, lb)) if ka == kb => {
                    self.emit(&mut out, ka, la, lb);
                }
                (Resolved::Lone(ka, la), Resolved::Lone(kb, lb)) => {
                    let mut both = [(ka, la, Leaf::empty()), (kb, Leaf::empty(), lb)];
                    both.sort_by(|x, y| x.0.tree_cmp(&y.0));
                    for (key, old, new) in both {
                        self.emit(&mut out, key, old, new);
                    }
                }
                (Resolved::Lone(key, leaf), Resolved::Empty) => {
                    self.emit(&mut out, key, leaf, Leaf::empty());
                }
                (Resolved::Empty, Resolved::Lone(key, leaf)) => {
                    self.emit(&mut out, key, Leaf::empty(), leaf);
                }
                (Resolved::Empty, Resolved::Empty) => {}
                (a, b) => {
                    if pos.level() >= MAX_LEVEL {
                        return Err(PlanError::UnexpectedNode {
                            hash: Hash::default(),
                            level: MAX_LEVEL,
                            found: "branch",
                        }
                        .into());
                    }
                    for right in [true, false] {
                        stack.push((
                            pos.child(right),
                            Side::child(&a, &pos, right),
                            Side::child(&b, &pos, right),
                        ));
                    }
                }
            }
        }
        Ok((out, true))
    }

    /// Reads the nodes of up to [`FETCH_BATCH`] pending subtrees from the
    /// top of the stack that neither cache holds: one call per side.
    async fn fill(
        &self,
        stack: &[(Position, Side, Side)],
        old_cache: &mut NodeCache,
        new_cache: &mut NodeCache,
    ) -> Res<(), S> {
        let mut old_want = Vec::new();
        let mut new_want = Vec::new();
        for (pos, a, b) in stack.iter().rev().take(FETCH_BATCH) {
            if let Side::Stored(h) = a
                && !old_cache.contains(h)
            {
                old_want.push((*pos, *h));
            }
            if let Side::Stored(h) = b
                && !new_cache.contains(h)
            {
                new_want.push((*pos, *h));
            }
        }
        for (view_store, at, want, cache) in [
            (
                self.old.tree.store(),
                self.old.target.at,
                old_want,
                old_cache,
            ),
            (
                self.new.tree.store(),
                self.new.target.at,
                new_want,
                new_cache,
            ),
        ] {
            if !want.is_empty() {
                let nodes = view_store
                    .read_positions(at, &want)
                    .await
                    .map_err(TreeError::Store)?;
                cache.extend(nodes);
            }
        }
        Ok(())
    }
}

/// Reads a side's node from `cache` (taking it out).
fn resolve(cache: &mut NodeCache, pos: &Position, side: Side) -> Result<Resolved, PlanError> {
    let level = pos.level();
    let hash = match side {
        Side::Empty => return Ok(Resolved::Empty),
        Side::Lone(key, leaf) => return Ok(Resolved::Lone(key, leaf)),
        Side::Stored(hash) => hash,
    };
    let node = match cache.node(&hash) {
        // Branches may be met again at other positions of a full tree.
        Some(Node::Branch { left, right, .. }) => {
            return Ok(Resolved::Branch {
                left: *left,
                right: *right,
            });
        }
        Some(_) => cache.take(&hash),
        None => None,
    };
    match node {
        Some(Node::Compacted { key, leaf }) => {
            Ok(Resolved::Lone(key.under_path(pos.path(), level), leaf))
        }
        Some(Node::Leaf(leaf)) if level == MAX_LEVEL => Ok(Resolved::Lone(*pos.path(), leaf)),
        Some(other) => Err(PlanError::UnexpectedNode {
            hash,
            level,
            found: other.kind_name(),
        }),
        None => Err(PlanError::MissingNode { hash, level }),
    }
}
