//! The read phase: fetch every node a descent will touch, one store call per
//! level while several keys share a node, then one call for all the paths
//! that hold a single key (stores that can walk a key's path server-side).

use crate::empty::is_empty_hash;
use crate::error::{PlanError, TreeError};
use crate::key::Key;
use crate::node::{ComputedNode, Node};
use crate::store::{PathStart, TreeStore};
use crate::tree::cache::NodeCache;

/// Fetches the nodes on the paths of `keys` (sorted in tree order), level by
/// level: the children of every touched node at one depth come back in one
/// [`TreeStore::fetch_nodes`] call. With `siblings`, the off-path child of
/// every touched branch is fetched too (proofs need its sum; compacted
/// deletes may pull it up).
///
/// Costs about `depth + 1` round trips whatever the number of keys. When the
/// store can walk single-key paths server-side, a path stops being read level
/// by level once it holds one key, and all such paths are read in one final
/// call: `log2(keys) + 2` round trips or so, even on full trees whose paths
/// are 256 levels deep.
pub(crate) async fn fetch_paths<S: TreeStore>(
    store: &S,
    root: &ComputedNode,
    keys: &[Key],
    siblings: bool,
) -> Result<NodeCache, TreeError<S::Error>> {
    let mut cache = NodeCache::new();
    if keys.is_empty() || is_empty_hash(0, &root.hash) {
        return Ok(cache);
    }
    let chains = store.supports_key_paths();
    let mut starts: Vec<PathStart> = Vec::new();
    let mut want = Vec::new();
    let mut frontier = Vec::new();
    if chains && keys.len() == 1 {
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
        want.retain(|h| !cache.contains(h));
        if !want.is_empty() {
            let nodes = store.fetch_nodes(&want).await.map_err(TreeError::Store)?;
            cache.extend(nodes);
        }
        want.clear();
        let mut next = Vec::new();
        for (hash, level, range) in frontier {
            let node = crate::store::NodeSource::node(&cache, &hash)
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
    if !starts.is_empty() {
        match store
            .fetch_key_paths(&starts, siblings)
            .await
            .map_err(TreeError::Store)?
        {
            Some(nodes) => cache.extend(nodes),
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
