//! The other side of a sync: [`SyncPeer`], what a tree needs of a peer to
//! be brought level with it (its subtrees, and its change feed if it has
//! one). Both ways of syncing ([`Tree::sync_from`](crate::Tree::sync_from)
//! and [`Tree::follow`](crate::Tree::follow)) ask it.

use std::future::Future;

use crate::descent::Subtree;
use crate::error::TreeError;
use crate::key::Key;
use crate::layout::Layout;
use crate::leaf::Leaf;
use crate::node::ComputedNode;
use crate::position::Position;
use crate::store::{ChangePage, TreeStore};
use crate::tree::View;

/// A tree a local tree can be brought level with.
pub trait SyncPeer: Sync {
    /// The peer's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The two children of the subtree under each of `prefixes` in the
    /// peer's tree with root `root`, in order.
    fn children(
        &self,
        root: &ComputedNode,
        prefixes: &[Position],
    ) -> impl Future<Output = Result<Vec<[Subtree; 2]>, Self::Error>> + Send;

    /// The page of the peer's change feed after the newest version whose
    /// root is `from`, about `limit` changes (see
    /// [`JournalStore::changes`](crate::store::JournalStore::changes));
    /// `Ok(None)` when the peer's journal does not cover such a version.
    /// The default: the peer has no feed, and syncs take the diff walk.
    fn changes_from(
        &self,
        from: &ComputedNode,
        limit: usize,
    ) -> impl Future<Output = Result<Option<ChangePage>, Self::Error>> + Send {
        let _ = (from, limit);
        async { Ok(None) }
    }
}

/// How many of `batch`'s leaves are written (upserts) and how many deleted
/// (an empty leaf deletes).
pub(crate) fn upserts_and_deletes(batch: &[(Key, Leaf)]) -> (u64, u64) {
    let deletes = batch.iter().filter(|(_, leaf)| leaf.is_empty()).count() as u64;
    (batch.len() as u64 - deletes, deletes)
}

impl<S: TreeStore, L: Layout> SyncPeer for View<'_, S, L> {
    type Error = TreeError<S::Error>;

    fn children(
        &self,
        root: &ComputedNode,
        prefixes: &[Position],
    ) -> impl Future<Output = Result<Vec<[Subtree; 2]>, Self::Error>> + Send {
        View::children(self, root, prefixes)
    }
}
