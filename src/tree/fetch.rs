//! The read phase: fetch every node a descent will touch, one store call per level.

use crate::empty::is_empty_hash;
use crate::error::{PlanError, TreeError};
use crate::key::Key;
use crate::node::{ComputedNode, Node};
use crate::store::TreeStore;
use crate::tree::cache::NodeCache;

/// Fetches the nodes on the paths of `keys` (sorted in tree order), level by
/// level: the children of every touched node at one depth come back in one
/// [`TreeStore::fetch_nodes`] call. With `siblings`, the off-path child of
/// every touched branch is fetched too (proofs need its sum; compacted
/// deletes may pull it up).
///
/// Costs about `depth + 1` round trips whatever the number of keys.
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
    let mut want = vec![root.hash];
    let mut frontier = vec![(root.hash, 0usize, 0..keys.len())];
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
                if !sub.is_empty() {
                    want.push(child);
                    next.push((child, level + 1, sub));
                } else if siblings {
                    want.push(child);
                }
            }
        }
        frontier = next;
    }
    Ok(cache)
}
