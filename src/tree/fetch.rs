//! The read phase: fetch every node a descent will touch, one store call per
//! level while several keys share a node, then one call for all the paths
//! that hold a single key (stores that can walk a key's path server-side).
//! Nodes the store handle remembers ([`RecentNodes`]) are taken from memory
//! first, and single-key paths are walked through them as far as they
//! reach; only what is left goes to the store, and what comes back is
//! remembered.

use crate::descent::NodeCache;
use crate::descent::NodeSource;
use crate::empty::is_empty_hash;
use crate::error::{PlanError, TreeError};
use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::node::{ComputedNode, Node};
use crate::store::{PathStart, ReadAt, RecentNodes, TreeStore};

/// Fetches the nodes on the paths of `keys` (sorted in tree order), level by
/// level: the children of every touched node at one depth come back in one
/// [`TreeStore::fetch_nodes`] call. With `siblings`, the off-path child of
/// every touched branch is fetched too (a compacted delete may pull it
/// up); without, the descent knows it by the hash its parent holds and
/// the sum its parent's sum leaves (proofs, reads, and writes that delete
/// nothing).
///
/// A write's read on a store that reads by position skips the handle's
/// remembered nodes ([`TreeStore::reads_by_position`]).
///
/// Costs about `depth + 1` round trips whatever the number of keys. When the
/// store can walk single-key paths server-side, a path stops being read level
/// by level once it holds one key, and all such paths are read in one final
/// call: `log2(keys) + 2` round trips or so, even on full trees whose paths
/// are 256 levels deep.
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
    let by_position = store.reads_by_position();
    // A position store's commit merges into the rows on the batch's
    // paths, which its path read hands it: a write that took nodes from
    // memory would only move those reads into the commit (one more
    // statement, under the write lock).
    let recent = if for_write && by_position {
        None
    } else {
        store.recent_nodes()
    };
    let chains = store.supports_key_paths();
    let mut starts: Vec<PathStart> = Vec::new();
    let mut want = Vec::new();
    let mut frontier = Vec::new();
    if by_position {
        // Every ancestor's position follows from the key: each path is one
        // start at the root, all read in one store call.
        starts.extend(keys.iter().map(|key| PathStart {
            hash: root.hash,
            level: 0,
            key: *key,
        }));
    } else if chains && keys.len() == 1 {
        starts.push(PathStart {
            hash: root.hash,
            level: 0,
            key: keys[0],
        });
    } else {
        want.push(root.hash);
        frontier.push((root.hash, 0usize, 0..keys.len()));
    }
    while !want.is_empty() {
        want.sort_unstable();
        want.dedup();
        match recent {
            Some(recent) => want.retain(|h| !take_remembered(recent, &mut cache, h)),
            None => want.retain(|h| !cache.contains(h)),
        }
        if !want.is_empty() {
            let nodes = store.fetch_nodes(&want).await.map_err(TreeError::Store)?;
            remember(recent, &nodes);
            cache.extend(nodes);
        }
        want.clear();
        let mut next = Vec::new();
        for (hash, level, range) in frontier {
            let node = cache
                .node(&hash)
                .ok_or(PlanError::MissingNode { hash, level })?;
            let Node::Branch { left, right, .. } = node else {
                continue;
            };
            let split = range.start + keys[range.clone()].partition_point(|k| !k.bit(level));
            for (child, sub) in [(*left, range.start..split), (*right, split..range.end)] {
                if is_empty_hash(level + 1, &child) {
                    continue;
                }
                if chains && sub.len() == 1 {
                    starts.push(PathStart {
                        hash: child,
                        level: level + 1,
                        key: keys[sub.start],
                    });
                } else if !sub.is_empty() {
                    want.push(child);
                    next.push((child, level + 1, sub));
                } else if siblings {
                    want.push(child);
                }
            }
        }
        frontier = next;
    }
    let mut off_path = Vec::new();
    if let Some(recent) = recent {
        starts = walk_remembered(
            recent,
            &mut cache,
            starts,
            siblings,
            by_position,
            &mut off_path,
        );
    }
    if !off_path.is_empty() {
        off_path.sort_unstable();
        off_path.dedup();
        let nodes = store
            .fetch_nodes(&off_path)
            .await
            .map_err(TreeError::Store)?;
        remember(recent, &nodes);
        cache.extend(nodes);
    }
    if !starts.is_empty() {
        match store
            .fetch_key_paths(at, &starts, siblings)
            .await
            .map_err(TreeError::Store)?
        {
            Some(nodes) => {
                remember(recent, &nodes);
                cache.extend(nodes);
            }
            None => {
                return Err(TreeError::Plan(PlanError::MissingNode {
                    hash: starts[0].hash,
                    level: starts[0].level,
                }));
            }
        }
    }
    Ok(cache)
}

/// Hands nodes just read from the store to the handle's memory, if any.
fn remember(recent: Option<&RecentNodes>, nodes: &[(Hash, Node)]) {
    if let Some(recent) = recent {
        recent.remember(nodes.iter().map(|(h, n)| (h, n)));
    }
}

/// Follows each single-key path through the remembered nodes, copying them
/// into `cache`, and returns where each walk has to continue in the store
/// (none when a path ends in memory). With `siblings`, off-path children
/// that are not remembered are pushed to `off_path` for one store read;
/// on a store that reads `by_position` the walk stops at such a branch
/// instead, since the store's path read brings the off-path children.
fn walk_remembered(
    recent: &RecentNodes,
    cache: &mut NodeCache,
    starts: Vec<PathStart>,
    siblings: bool,
    by_position: bool,
    off_path: &mut Vec<Hash>,
) -> Vec<PathStart> {
    let mut rest = Vec::new();
    for start in starts {
        let (mut hash, mut level) = (start.hash, start.level);
        loop {
            if !take_remembered(recent, cache, &hash) {
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
            if siblings
                && !is_empty_hash(level + 1, &other)
                && !take_remembered(recent, cache, &other)
            {
                if by_position {
                    rest.push(PathStart {
                        hash,
                        level,
                        key: start.key,
                    });
                    break;
                }
                off_path.push(other);
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

/// True when `hash` is in `cache`, after copying it there from `recent` if
/// it was only remembered.
fn take_remembered(recent: &RecentNodes, cache: &mut NodeCache, hash: &Hash) -> bool {
    if cache.contains(hash) {
        return true;
    }
    match recent.get(hash) {
        Some(node) => {
            cache.insert(*hash, node);
            true
        }
        None => false,
    }
}
