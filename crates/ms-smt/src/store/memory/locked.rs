//! The memory store under its write lock: what the write engine plans and
//! commits on when it falls back to the lock ([`ForestStore::locked`]).

use crate::hash::Hash;
use crate::node::{ComputedNode, Node};
use crate::store::{ForestCommit, ForestStore, MemoryError, MemoryStore, PathRead, TreeUpdate};

/// A memory database while [`MemoryStore::locked`](ForestStore::locked)
/// holds its write lock: reads as the store's, commits without taking the
/// lock again.
pub(super) struct LockedMemory<'a>(pub &'a MemoryStore);

impl ForestStore for LockedMemory<'_> {
    type Error = MemoryError;
    type Tree = MemoryStore;

    fn tree(&self, name: &str) -> Result<MemoryStore, MemoryError> {
        self.0.open_namespace(name)
    }

    async fn names(&self) -> Result<Vec<String>, MemoryError> {
        self.0.names().await
    }

    async fn load_roots(&self, trees: &[&MemoryStore]) -> Result<Vec<ComputedNode>, MemoryError> {
        self.0.load_roots(trees).await
    }

    async fn read_paths_many(
        &self,
        reads: &[PathRead<'_, MemoryStore>],
    ) -> Result<Vec<Vec<(Hash, Node)>>, MemoryError> {
        self.0.read_paths_many(reads).await
    }

    async fn commit_trees(
        &self,
        updates: &[TreeUpdate<'_, MemoryStore>],
    ) -> Result<ForestCommit, MemoryError> {
        self.0.commit_parts(updates)
    }
}
