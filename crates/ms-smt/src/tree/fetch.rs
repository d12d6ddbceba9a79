//! The read phase: every node a descent will touch, in one store call.
//! Nodes the store handle remembers ([`RecentNodes`]) are taken from memory
//! first, and each key's path is walked through them as far as they reach;
//! only what is left goes to the store ([`TreeStore::read_paths`]), and
//! what comes back is remembered.

use crate::descent::{NodeCache, NodeSource};
use crate::empty::is_empty_hash;
use crate::error::TreeError;
use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::node::{ComputedNode, Node};
use crate::store::{ForestStore, PathRead, PathStart, ReadAt, RecentNodes, TreeStore};

/// Reads the nodes on the paths of `keys` (sorted in tree order) under
/// `root`. With `siblings`, the off-path child of every branch passed too
/// (a compacted delete may pull it up); without, the descent knows it by
/// the hash its parent holds and the sum its parent's sum leaves (proofs,
/// reads, and writes that delete nothing). `for_write` marks a write's read
/// phase, for which a store may decline to hand out remembered nodes.
///
/// One round trip at most, whatever the number of keys.
pub(crate) async fn fetch_paths<S: TreeStore>(
    store: &S,
    at: ReadAt,
    root: &ComputedNode,
    keys: &[Key],
    siblings: bool,
    for_write: bool,
) -> Result<NodeCache, TreeError<S::Error>> {
    let mut cache = NodeCache::new();
    if keys.is_empty() || is_empty_hash(0, &root.hash) {
        return Ok(cache);
    }
    let recent = store.recent_nodes(for_write);
    let mut starts = from_root(root, keys);
    if let Some(recent) = recent {
        starts = walk_known(&|hash| recent.get(hash), &mut cache, starts, siblings);
    }
    if !starts.is_empty() {
        let nodes = store
            .read_paths(at, &starts, siblings)
            .await
            .map_err(TreeError::Store)?;
        remember(recent, &nodes);
        cache.extend(nodes);
    }
    Ok(cache)
}

/// Every key's walk, from the root.
fn from_root(root: &ComputedNode, keys: &[Key]) -> Vec<PathStart> {
    keys.iter()
        .map(|key| PathStart {
            hash: root.hash,
            level: 0,
            key: *key,
        })
        .collect()
}

/// Hands nodes just read from the store to the handle's memory, if any.
fn remember(recent: Option<&RecentNodes>, nodes: &[(Hash, Node)]) {
    if let Some(recent) = recent {
        recent.remember(nodes.iter().map(|(h, n)| (h, n)));
    }
}

/// One tree's part of [`fetch_trees`]: its handle, its keys (sorted in
/// tree order), whether the siblings beside their paths are read too, and,
/// for a tree whose last write is planned but not committed yet, that
/// write's new root and its read and written nodes.
pub(crate) struct TreeFetch<'a, T> {
    pub tree: &'a T,
    pub keys: &'a [Key],
    pub siblings: bool,
    pub over: Option<(ComputedNode, &'a NodeCache)>,
}

/// The read phase of a write of several trees: each tree's root (one
/// store read for all the committed ones) and the nodes on its keys'
/// paths (one store read for all of them), as [`fetch_paths`] reads one
/// tree. A planned tree's paths are walked through its planned nodes
/// first; the rest, which that write did not change and so is the same
/// in the store before and after its commit, is read from the store.
pub(crate) async fn fetch_trees<S: ForestStore>(
    store: &S,
    trees: &[TreeFetch<'_, S::Tree>],
    for_write: bool,
) -> Result<Vec<(ComputedNode, NodeCache)>, TreeError<S::Error>> {
    let committed: Vec<&S::Tree> = trees
        .iter()
        .filter(|t| t.over.is_none())
        .map(|t| t.tree)
        .collect();
    let mut loaded = if committed.is_empty() {
        Vec::new()
    } else {
        store
            .load_roots(&committed)
            .await
            .map_err(TreeError::Store)?
    }
    .into_iter();
    let mut out = Vec::with_capacity(trees.len());
    let mut reads = Vec::new();
    let mut read_index = Vec::new();
    for (i, t) in trees.iter().enumerate() {
        let root = match t.over {
            Some((root, _)) => root,
            None => loaded.next().unwrap_or_else(ComputedNode::empty_root),
        };
        let mut cache = NodeCache::new();
        if !t.keys.is_empty() && !is_empty_hash(0, &root.hash) {
            let mut starts = from_root(&root, t.keys);
            match t.over {
                Some((_, planned)) => {
                    let lookup = |hash: &Hash| planned.node(hash).cloned();
                    starts = walk_known(&lookup, &mut cache, starts, t.siblings);
                }
                None => {
                    if let Some(recent) = t.tree.recent_nodes(for_write) {
                        starts = walk_known(&|h| recent.get(h), &mut cache, starts, t.siblings);
                    }
                }
            }
            if !starts.is_empty() {
                reads.push(PathRead {
                    tree: t.tree,
                    starts,
                    siblings: t.siblings,
                });
                read_index.push(i);
            }
        }
        out.push((root, cache));
    }
    if !reads.is_empty() {
        let found = store
            .read_paths_many(&reads)
            .await
            .map_err(TreeError::Store)?;
        for ((i, nodes), read) in read_index.into_iter().zip(found).zip(&reads) {
            if trees[i].over.is_none() {
                remember(read.tree.recent_nodes(for_write), &nodes);
            }
            out[i].1.extend(nodes);
        }
    }
    Ok(out)
}

/// Follows each single-key path through the nodes `lookup` knows, copying
/// them into `cache`, and returns where each walk has to continue in the
/// store (none when a path ends in what is known). With `siblings`, a walk
/// stops at a branch whose off-path child is not known: the store's path
/// read from there brings it.
fn walk_known(
    lookup: &dyn Fn(&Hash) -> Option<Node>,
    cache: &mut NodeCache,
    starts: Vec<PathStart>,
    siblings: bool,
) -> Vec<PathStart> {
    let mut rest = Vec::new();
    for start in starts {
        let (mut hash, mut level) = (start.hash, start.level);
        loop {
            if !take_known(lookup, cache, &hash) {
                rest.push(PathStart {
                    hash,
                    level,
                    key: start.key,
                });
                break;
            }
            let Some(Node::Branch { left, right, .. }) = cache.node(&hash) else {
                break;
            };
            let (left, right) = (*left, *right);
            if level >= MAX_LEVEL {
                break; // malformed; the descent reports it
            }
            let (next, other) = if start.key.bit(level) {
                (right, left)
            } else {
                (left, right)
            };
            if siblings && !is_empty_hash(level + 1, &other) && !take_known(lookup, cache, &other) {
                rest.push(PathStart {
                    hash,
                    level,
                    key: start.key,
                });
                break;
            }
            if is_empty_hash(level + 1, &next) {
                break;
            }
            hash = next;
            level += 1;
        }
    }
    rest
}

/// True when `hash` is in `cache`, after copying it there from `lookup` if
/// only that knew it.
fn take_known(lookup: &dyn Fn(&Hash) -> Option<Node>, cache: &mut NodeCache, hash: &Hash) -> bool {
    if cache.contains(hash) {
        return true;
    }
    match lookup(hash) {
        Some(node) => {
            cache.insert(*hash, node);
            true
        }
        None => false,
    }
}
