//! The store's half of a write under the namespace's write lock: one read
//! of every key's path, the pure descent, one commit. The SQL stores run it
//! on a handle bound to the locked transaction; it never names the tree.

use crate::descent::{self, NodeCache};
use crate::empty::is_empty_hash;
use crate::error::TreeError;
use crate::key::Key;
use crate::layout::LayoutKind;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::store::blocking::hashing;
use crate::store::traits::{CommitOutcome, ReadAt, TreeStore, path_starts};

/// Writes `batch` with `kind`'s descent through `store`, which must hold
/// the namespace's write lock (nothing else can move the root meanwhile),
/// and returns the new root. The same read, plan and commit as an
/// optimistic write, run once.
pub(crate) async fn write_planned<S: TreeStore>(
    store: &S,
    kind: LayoutKind,
    batch: &[(Key, Leaf)],
) -> Result<ComputedNode, TreeError<S::Error>> {
    let items = descent::prepare(batch);
    descent::batch_sum(&items)?;
    let root = store.load_root().await.map_err(TreeError::Store)?;
    if items.is_empty() {
        return Ok(root);
    }
    let mut cache = NodeCache::new();
    if !is_empty_hash(0, &root.hash) {
        let (starts, siblings) = path_starts(kind, &root, &items);
        let nodes = store
            .read_paths(ReadAt::Current, &starts, siblings)
            .await
            .map_err(TreeError::Store)?;
        cache.extend(nodes);
    }
    let update = hashing(items.len(), || {
        descent::plan_items(kind, &cache, root, &items)
    })?;
    if update.is_noop() {
        return Ok(update.new_root);
    }
    match store.commit(&update).await.map_err(TreeError::Store)? {
        CommitOutcome::Committed => {
            if let Some(recent) = store.recent_nodes(false) {
                recent.remember_written(&update.inserts);
            }
            Ok(update.new_root)
        }
        // Under the lock the root cannot move; a store that lets it is
        // answered as any lost race.
        CommitOutcome::RootMoved { .. } => Err(TreeError::Contention { attempts: 1 }),
    }
}
