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
use crate::store::{PathStart, ReadAt, RecentNodes, TreeStore};

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

/// [`fetch_paths`] for a tree that is not committed yet: its root and
/// every node it changed are in `planned` (the read and written nodes of
/// the write before it); each path is walked through them as far as they
/// reach, and the rest, which that write did not change and so is the same
/// in the store before and after its commit, is read from the store.
pub(crate) async fn fetch_paths_over<S: TreeStore>(
    store: &S,
    planned: &NodeCache,
    root: &ComputedNode,
    keys: &[Key],
    siblings: bool,
) -> Result<NodeCache, TreeError<S::Error>> {
    let mut cache = NodeCache::new();
    if keys.is_empty() || is_empty_hash(0, &root.hash) {
        return Ok(cache);
    }
    let starts = from_root(root, keys);
    let lookup = |hash: &Hash| planned.node(hash).cloned();
    let starts = walk_known(&lookup, &mut cache, starts, siblings);
    if !starts.is_empty() {
        let nodes = store
            .read_paths(ReadAt::Current, &starts, siblings)
            .await
            .map_err(TreeError::Store)?;
        cache.extend(nodes);
    }
    Ok(cache)
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
